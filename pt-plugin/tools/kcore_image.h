// Loads the PT_LOAD segments of a kthost snapshot's kcore into a libipt image.
#ifndef KTHOST_PT_KCORE_IMAGE_H
#define KTHOST_PT_KCORE_IMAGE_H

#include <string>

struct pt_image;

namespace ktpt {

// Adds every PT_LOAD of the ELF64 file at `path` to `image` (by file offset,
// no copy).  Returns the number of segments added, or -1 with `error` set.
int add_kcore_segments(struct pt_image* image, const std::string& path, std::string& error);

}  // namespace ktpt

#endif
