"""What admission does to a LinkerdConfig, with the webhooks on or off alike: defaulting,
validation, and the webhook handlers that serve them."""
