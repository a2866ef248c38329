file(REMOVE_RECURSE
  "CMakeFiles/test_mask.dir/unit/test_mask.c.o"
  "CMakeFiles/test_mask.dir/unit/test_mask.c.o.d"
  "test_mask"
  "test_mask.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_mask.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
