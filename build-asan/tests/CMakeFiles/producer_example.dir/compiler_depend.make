# Empty compiler generated dependencies file for producer_example.
# This may be replaced when dependencies are built.
