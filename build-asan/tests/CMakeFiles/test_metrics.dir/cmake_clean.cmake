file(REMOVE_RECURSE
  "CMakeFiles/test_metrics.dir/unit/test_metrics.c.o"
  "CMakeFiles/test_metrics.dir/unit/test_metrics.c.o.d"
  "test_metrics"
  "test_metrics.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_metrics.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
