"""Object storage as a tier: an S3 endpoint, either the tool's own embedded server (``server``) or a
user's, reached through one client (``client``), with the dataset's objects listed by a manifest."""
