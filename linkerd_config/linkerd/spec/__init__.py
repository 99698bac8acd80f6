"""The LinkerdConfig as an API: its CRD and schema, where it writes and who owns a target, its
versions and their conversion, and the sections a user writes."""
