# Empty compiler generated dependencies file for producer_conns.
# This may be replaced when dependencies are built.
