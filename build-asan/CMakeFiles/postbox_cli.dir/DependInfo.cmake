
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/wt-pii/src/cli/args.c" "CMakeFiles/postbox_cli.dir/src/cli/args.c.o" "gcc" "CMakeFiles/postbox_cli.dir/src/cli/args.c.o.d"
  "/work/wt-pii/src/cli/cmd_cdc.c" "CMakeFiles/postbox_cli.dir/src/cli/cmd_cdc.c.o" "gcc" "CMakeFiles/postbox_cli.dir/src/cli/cmd_cdc.c.o.d"
  "/work/wt-pii/src/cli/cmd_consume.c" "CMakeFiles/postbox_cli.dir/src/cli/cmd_consume.c.o" "gcc" "CMakeFiles/postbox_cli.dir/src/cli/cmd_consume.c.o.d"
  "/work/wt-pii/src/cli/cmd_dlq.c" "CMakeFiles/postbox_cli.dir/src/cli/cmd_dlq.c.o" "gcc" "CMakeFiles/postbox_cli.dir/src/cli/cmd_dlq.c.o.d"
  "/work/wt-pii/src/cli/cmd_init.c" "CMakeFiles/postbox_cli.dir/src/cli/cmd_init.c.o" "gcc" "CMakeFiles/postbox_cli.dir/src/cli/cmd_init.c.o.d"
  "/work/wt-pii/src/cli/cmd_purge.c" "CMakeFiles/postbox_cli.dir/src/cli/cmd_purge.c.o" "gcc" "CMakeFiles/postbox_cli.dir/src/cli/cmd_purge.c.o.d"
  "/work/wt-pii/src/cli/cmd_relay.c" "CMakeFiles/postbox_cli.dir/src/cli/cmd_relay.c.o" "gcc" "CMakeFiles/postbox_cli.dir/src/cli/cmd_relay.c.o.d"
  "/work/wt-pii/src/cli/cmd_status.c" "CMakeFiles/postbox_cli.dir/src/cli/cmd_status.c.o" "gcc" "CMakeFiles/postbox_cli.dir/src/cli/cmd_status.c.o.d"
  "/work/wt-pii/src/cli/main.c" "CMakeFiles/postbox_cli.dir/src/cli/main.c.o" "gcc" "CMakeFiles/postbox_cli.dir/src/cli/main.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/wt-pii/build-asan/CMakeFiles/postbox_core.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
