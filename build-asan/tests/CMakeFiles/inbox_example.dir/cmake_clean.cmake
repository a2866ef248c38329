file(REMOVE_RECURSE
  "CMakeFiles/inbox_example.dir/integration/inbox_example.c.o"
  "CMakeFiles/inbox_example.dir/integration/inbox_example.c.o.d"
  "inbox_example"
  "inbox_example.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/inbox_example.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
