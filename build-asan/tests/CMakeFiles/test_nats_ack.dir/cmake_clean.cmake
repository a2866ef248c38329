file(REMOVE_RECURSE
  "CMakeFiles/test_nats_ack.dir/unit/test_nats_ack.c.o"
  "CMakeFiles/test_nats_ack.dir/unit/test_nats_ack.c.o.d"
  "test_nats_ack"
  "test_nats_ack.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_nats_ack.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
