# Empty dependencies file for amqp-tool.
# This may be replaced when dependencies are built.
