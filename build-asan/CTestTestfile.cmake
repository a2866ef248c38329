# CMake generated Testfile for 
# Source directory: /work/wt-pii
# Build directory: /work/wt-pii/build-asan
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
subdirs("tests")
