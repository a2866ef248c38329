file(REMOVE_RECURSE
  "CMakeFiles/postbox_cli.dir/src/cli/args.c.o"
  "CMakeFiles/postbox_cli.dir/src/cli/args.c.o.d"
  "CMakeFiles/postbox_cli.dir/src/cli/cmd_cdc.c.o"
  "CMakeFiles/postbox_cli.dir/src/cli/cmd_cdc.c.o.d"
  "CMakeFiles/postbox_cli.dir/src/cli/cmd_consume.c.o"
  "CMakeFiles/postbox_cli.dir/src/cli/cmd_consume.c.o.d"
  "CMakeFiles/postbox_cli.dir/src/cli/cmd_dlq.c.o"
  "CMakeFiles/postbox_cli.dir/src/cli/cmd_dlq.c.o.d"
  "CMakeFiles/postbox_cli.dir/src/cli/cmd_init.c.o"
  "CMakeFiles/postbox_cli.dir/src/cli/cmd_init.c.o.d"
  "CMakeFiles/postbox_cli.dir/src/cli/cmd_purge.c.o"
  "CMakeFiles/postbox_cli.dir/src/cli/cmd_purge.c.o.d"
  "CMakeFiles/postbox_cli.dir/src/cli/cmd_relay.c.o"
  "CMakeFiles/postbox_cli.dir/src/cli/cmd_relay.c.o.d"
  "CMakeFiles/postbox_cli.dir/src/cli/cmd_status.c.o"
  "CMakeFiles/postbox_cli.dir/src/cli/cmd_status.c.o.d"
  "CMakeFiles/postbox_cli.dir/src/cli/main.c.o"
  "CMakeFiles/postbox_cli.dir/src/cli/main.c.o.d"
  "postbox"
  "postbox.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/postbox_cli.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
