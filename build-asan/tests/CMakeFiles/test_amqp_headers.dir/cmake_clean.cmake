file(REMOVE_RECURSE
  "CMakeFiles/test_amqp_headers.dir/unit/test_amqp_headers.c.o"
  "CMakeFiles/test_amqp_headers.dir/unit/test_amqp_headers.c.o.d"
  "test_amqp_headers"
  "test_amqp_headers.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_amqp_headers.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
