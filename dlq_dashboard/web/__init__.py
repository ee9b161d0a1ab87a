"""The web layer: blueprints for pages, the JSON API and authentication."""
