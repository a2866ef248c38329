file(REMOVE_RECURSE
  "CMakeFiles/test_pgoutput.dir/unit/test_pgoutput.c.o"
  "CMakeFiles/test_pgoutput.dir/unit/test_pgoutput.c.o.d"
  "test_pgoutput"
  "test_pgoutput.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_pgoutput.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
