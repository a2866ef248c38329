file(REMOVE_RECURSE
  "CMakeFiles/producer_conns.dir/integration/producer_conns.c.o"
  "CMakeFiles/producer_conns.dir/integration/producer_conns.c.o.d"
  "producer_conns"
  "producer_conns.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/producer_conns.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
