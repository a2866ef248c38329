file(REMOVE_RECURSE
  "libpostbox_core.a"
)
