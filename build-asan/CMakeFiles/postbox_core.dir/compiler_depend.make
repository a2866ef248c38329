# Empty compiler generated dependencies file for postbox_core.
# This may be replaced when dependencies are built.
