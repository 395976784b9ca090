/* The exec channel: the host asks the guest to run a shell command and gets
 * back its exit status and output. Used by tests and workloads; runs over the
 * virtio-serial port named KTEXEC_PORT_NAME.
 *
 * All integers are little-endian. One request at a time per connection.
 *   request:  struct ktexec_request, then cmd_len bytes of command (no NUL)
 *   response: struct ktexec_response, then out_len bytes of output
 *             (stdout and stderr interleaved, as the command wrote them)
 * Limits protect both sides: a peer that sends a larger length is wrong,
 * and the receiver drops the connection / resynchronises on the magic.
 */
#ifndef KTEXEC_PROTO_H
#define KTEXEC_PROTO_H

#include <stdint.h>

#include "kthost_shared.h"

#define KTEXEC_PORT_NAME KTHOST_PORT_EXEC
#define KTEXEC_REQUEST_MAGIC 0x3158544bu  /* "KTX1" */
#define KTEXEC_RESPONSE_MAGIC 0x3152544bu /* "KTR1" */
#define KTEXEC_MAX_COMMAND (64u * 1024u)
#define KTEXEC_MAX_OUTPUT (16u * 1024u * 1024u)

/* response flags */
#define KTEXEC_FLAG_TRUNCATED 1u /* output exceeded KTEXEC_MAX_OUTPUT; the rest was dropped */
#define KTEXEC_FLAG_TIMED_OUT 2u /* the command ran past timeout_ms and was killed */
#define KTEXEC_FLAG_NOT_RUN 4u   /* the command could not be started (fork/exec failed) */

struct ktexec_request {
  uint32_t magic;      /* KTEXEC_REQUEST_MAGIC */
  uint32_t id;         /* echoed in the response */
  uint32_t timeout_ms; /* 0: no limit */
  uint32_t cmd_len;    /* <= KTEXEC_MAX_COMMAND */
};

struct ktexec_response {
  uint32_t magic;   /* KTEXEC_RESPONSE_MAGIC */
  uint32_t id;      /* the request's id */
  int32_t status;   /* exit code; 128+signal when killed by a signal; -1 when not run */
  uint32_t flags;   /* KTEXEC_FLAG_* */
  uint32_t out_len; /* <= KTEXEC_MAX_OUTPUT */
  uint32_t reserved;
};

#endif
