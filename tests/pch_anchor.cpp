// The one unit of kvf_test_pch, which owns the precompiled header the test targets share (tests/CMakeLists.txt).
