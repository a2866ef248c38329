file(REMOVE_RECURSE
  "CMakeFiles/test_driver.dir/unit/test_driver.c.o"
  "CMakeFiles/test_driver.dir/unit/test_driver.c.o.d"
  "test_driver"
  "test_driver.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_driver.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
