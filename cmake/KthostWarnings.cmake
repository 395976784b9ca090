# Warning and sanitizer flags shared by every kthost target.
add_library(kthost_flags INTERFACE)
target_compile_options(kthost_flags INTERFACE
  -Wall -Wextra -Wshadow -Wconversion -Wno-sign-conversion -Wnon-virtual-dtor
  -Wold-style-cast -Wcast-align -Woverloaded-virtual -Wnull-dereference
  -Wimplicit-fallthrough -Wformat=2)
if(KTHOST_WERROR)
  target_compile_options(kthost_flags INTERFACE -Werror)
endif()
if(KTHOST_SANITIZE)
  target_compile_options(kthost_flags INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  target_link_options(kthost_flags INTERFACE -fsanitize=address,undefined)
endif()

# C flags for the guest-kit binaries (static, no C++ specific warnings).
add_library(kthost_cflags INTERFACE)
target_compile_options(kthost_cflags INTERFACE -Wall -Wextra -Wshadow -Wformat=2 -O2)
if(KTHOST_WERROR)
  target_compile_options(kthost_cflags INTERFACE -Werror)
endif()
if(KTHOST_FUZZ)
  # Coverage instrumentation for everything the fuzz targets link.
  target_compile_options(kthost_flags INTERFACE -fsanitize=fuzzer-no-link)
endif()
