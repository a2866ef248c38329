# Empty compiler generated dependencies file for test_nats_subjects.
# This may be replaced when dependencies are built.
