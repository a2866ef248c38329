# Empty dependencies file for inbox_example.
# This may be replaced when dependencies are built.
