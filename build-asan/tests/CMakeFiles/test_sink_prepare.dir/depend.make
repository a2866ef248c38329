# Empty dependencies file for test_sink_prepare.
# This may be replaced when dependencies are built.
