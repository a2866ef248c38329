file(REMOVE_RECURSE
  "CMakeFiles/postbox.dir/src/common/str.c.o"
  "CMakeFiles/postbox.dir/src/common/str.c.o.d"
  "CMakeFiles/postbox.dir/src/inbox/api.c.o"
  "CMakeFiles/postbox.dir/src/inbox/api.c.o.d"
  "CMakeFiles/postbox.dir/src/store/producer.c.o"
  "CMakeFiles/postbox.dir/src/store/producer.c.o.d"
  "libpostbox.pdb"
  "libpostbox.so"
  "libpostbox.so.0"
  "libpostbox.so.0.1.0"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/postbox.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
