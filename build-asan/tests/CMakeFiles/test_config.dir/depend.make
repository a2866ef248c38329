# Empty dependencies file for test_config.
# This may be replaced when dependencies are built.
