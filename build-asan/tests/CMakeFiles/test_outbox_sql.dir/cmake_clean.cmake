file(REMOVE_RECURSE
  "CMakeFiles/test_outbox_sql.dir/unit/test_outbox_sql.c.o"
  "CMakeFiles/test_outbox_sql.dir/unit/test_outbox_sql.c.o.d"
  "test_outbox_sql"
  "test_outbox_sql.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_outbox_sql.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
