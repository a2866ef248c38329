# Empty compiler generated dependencies file for test_route.
# This may be replaced when dependencies are built.
