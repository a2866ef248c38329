# Empty dependencies file for nats-tool.
# This may be replaced when dependencies are built.
