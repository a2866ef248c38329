file(REMOVE_RECURSE
  "CMakeFiles/test_sink_prepare.dir/unit/test_sink_prepare.c.o"
  "CMakeFiles/test_sink_prepare.dir/unit/test_sink_prepare.c.o.d"
  "test_sink_prepare"
  "test_sink_prepare.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_sink_prepare.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
