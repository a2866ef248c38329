file(REMOVE_RECURSE
  "CMakeFiles/test_nats_subjects.dir/unit/test_nats_subjects.c.o"
  "CMakeFiles/test_nats_subjects.dir/unit/test_nats_subjects.c.o.d"
  "test_nats_subjects"
  "test_nats_subjects.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_nats_subjects.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
