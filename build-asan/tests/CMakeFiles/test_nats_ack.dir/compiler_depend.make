# Empty compiler generated dependencies file for test_nats_ack.
# This may be replaced when dependencies are built.
