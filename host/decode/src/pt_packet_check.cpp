#include "kthost/decode/pt_packet_check.h"

#include <intel-pt.h>

namespace kt {
namespace {

Error bad(const std::string& name, uint64_t offset, const std::string& what) {
  return Error(ErrorCode::InvalidInput, name + ": at offset " + std::to_string(offset) + ": " + what);
}

}  // namespace

// Walks every packet; the first one that does not decode is an error at its offset.
Status check_pt_packets(const std::string& name, const PtStream& pt) {
  if (pt.empty()) return ok_status();
  PtReleaser behind(pt);  // every byte is read: keep only a few MiB resident
  pt_config config;
  pt_config_init(&config);
  config.begin = const_cast<uint8_t*>(pt.data());  // libipt only reads
  config.end = const_cast<uint8_t*>(pt.data() + pt.size());
  pt_packet_decoder* dec = pt_pkt_alloc_decoder(&config);
  if (!dec) return Error(ErrorCode::LimitExceeded, name + ": cannot allocate a packet decoder");
  Status result;
  int status = pt_pkt_sync_forward(dec);
  if (status < 0) {
    result = bad(name, 0, "no PSB in the stream (" + std::string(pt_errstr(pt_errcode(status))) + ")");
  } else {
    uint64_t first = 0;
    pt_pkt_get_sync_offset(dec, &first);
    if (first != 0) result = bad(name, 0, "the stream does not start with a PSB (first PSB at " +
                                              std::to_string(first) + ")");
    for (;;) {
      if (!result) break;
      pt_packet packet;
      uint64_t offset = 0;
      pt_pkt_get_offset(dec, &offset);
      behind.reached(offset);
      status = pt_pkt_next(dec, &packet, sizeof packet);
      if (status == -pte_eos) break;
      if (status < 0) {
        result = bad(name, offset, std::string("bad PT packet: ") + pt_errstr(pt_errcode(status)));
        break;
      }
    }
  }
  pt_pkt_free_decoder(dec);
  return result;
}

}  // namespace kt
