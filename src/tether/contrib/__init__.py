"""Integrations with the frameworks Python apps live in. Each module is
optional and imported only by name: ``import tether`` imports none of them."""
