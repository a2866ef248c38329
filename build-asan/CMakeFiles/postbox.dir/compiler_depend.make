# Empty compiler generated dependencies file for postbox.
# This may be replaced when dependencies are built.
