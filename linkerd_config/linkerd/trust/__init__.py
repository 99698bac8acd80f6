"""Trust anchors: the guard that never lets a bundle split trust with running meshed pods."""
