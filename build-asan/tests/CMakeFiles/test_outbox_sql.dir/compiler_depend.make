# Empty compiler generated dependencies file for test_outbox_sql.
# This may be replaced when dependencies are built.
