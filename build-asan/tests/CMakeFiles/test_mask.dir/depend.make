# Empty dependencies file for test_mask.
# This may be replaced when dependencies are built.
