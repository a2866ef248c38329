file(REMOVE_RECURSE
  "CMakeFiles/producer_example.dir/integration/producer_example.c.o"
  "CMakeFiles/producer_example.dir/integration/producer_example.c.o.d"
  "producer_example"
  "producer_example.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/producer_example.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
