file(REMOVE_RECURSE
  "CMakeFiles/test_amqp_url.dir/unit/test_amqp_url.c.o"
  "CMakeFiles/test_amqp_url.dir/unit/test_amqp_url.c.o.d"
  "test_amqp_url"
  "test_amqp_url.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_amqp_url.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
