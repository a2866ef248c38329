# Empty dependencies file for test_amqp_url.
# This may be replaced when dependencies are built.
