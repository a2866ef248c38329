file(REMOVE_RECURSE
  "CMakeFiles/nats-tool.dir/tests/tools/nats_tool.c.o"
  "CMakeFiles/nats-tool.dir/tests/tools/nats_tool.c.o.d"
  "nats-tool"
  "nats-tool.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/nats-tool.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
