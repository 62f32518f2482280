"""The tuned/ files: storing verified winners per GPU and shape, and exporting them as C sources."""
