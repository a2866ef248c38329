file(REMOVE_RECURSE
  "CMakeFiles/amqp-tool.dir/tests/tools/amqp_tool.c.o"
  "CMakeFiles/amqp-tool.dir/tests/tools/amqp_tool.c.o.d"
  "amqp-tool"
  "amqp-tool.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/amqp-tool.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
