# Empty dependencies file for postbox.
# This may be replaced when dependencies are built.
