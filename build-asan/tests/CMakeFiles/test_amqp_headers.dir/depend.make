# Empty dependencies file for test_amqp_headers.
# This may be replaced when dependencies are built.
