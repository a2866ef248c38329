file(REMOVE_RECURSE
  "CMakeFiles/test_backoff.dir/unit/test_backoff.c.o"
  "CMakeFiles/test_backoff.dir/unit/test_backoff.c.o.d"
  "test_backoff"
  "test_backoff.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_backoff.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
