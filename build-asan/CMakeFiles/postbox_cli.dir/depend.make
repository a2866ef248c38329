# Empty dependencies file for postbox_cli.
# This may be replaced when dependencies are built.
