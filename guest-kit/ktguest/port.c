/* The virtio-serial port to the host.
 *
 * virtio_console semantics this relies on (and ktexec learnt the hard way):
 * while no host is connected, poll reports POLLHUP (and POLLIN, read returns
 * 0) at once and forever, and a non-blocking write fails with EAGAIN. So a
 * disconnected port is not polled (that would spin); the 100 ms timer looks
 * for the HUP to clear instead. A connected port is polled, and its POLLHUP
 * is how a departing host is noticed.
 *
 * A disconnect and reconnect that both happen between two polls cannot be
 * seen from here; the new host then finds no HELLO and must ask for one by
 * dropping the connection. With the host's client taking milliseconds to
 * reconnect and this loop polling continuously, that is unlikely.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "ktguest.h"
#include "kthost_shared.h"

#define PORT_NAME KTHOST_PORT_SIDEBAND
#define ERROR_BACKOFF_MS 1000
#define HOST_HELLO_WAIT_MS 3000

static struct {
  int fd;
  int connected;
  int ever_connected;
  int acked;   /* HELLO_ACK received on this connection */
  int session; /* HELLO and a state dump went out for the host on this connection */
  int ever_session;
  long long connected_at;
  long long reopen_at; /* after a host ERROR or a write error */
  int warned;
  uint8_t rbuf[2 * KTP_MAX_FRAME];
  size_t rlen;
} P = {.fd = -1};

int ktg_port_connected(void) { return P.connected && P.session; }

static int find_port(char *out, size_t out_size) {
  DIR *dir = opendir("/sys/class/virtio-ports");
  if (!dir) return -1;
  struct dirent *e;
  int found = -1;
  while ((e = readdir(dir)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[512], name[128];
    snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name", e->d_name);
    if (ktg_read_file(path, name, sizeof name) < 0) continue;
    name[strcspn(name, "\n")] = '\0';
    if (strcmp(name, PORT_NAME) == 0) {
      snprintf(out, out_size, "/dev/%s", e->d_name);
      found = 0;
      break;
    }
  }
  closedir(dir);
  return found;
}

static void try_open(void) {
  if (g_opt.fixed_fd >= 0) {
    P.fd = g_opt.fixed_fd;
  } else {
    char found[300];
    const char *path = g_opt.port_path;
    if (!path && find_port(found, sizeof found) == 0) path = found;
    if (path) P.fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (P.fd < 0) {
      if (!P.warned) ktg_log("waiting for %s", g_opt.port_path ? g_opt.port_path : "port " PORT_NAME);
      P.warned = 1;
      return;
    }
    ktg_log("opened %s", path);
  }
  P.warned = 0;
  /* A pty used for tests must pass bytes through untouched. */
  struct termios tio;
  if (tcgetattr(P.fd, &tio) == 0) {
    cfmakeraw(&tio);
    tcsetattr(P.fd, TCSANOW, &tio);
  }
  int fl = fcntl(P.fd, F_GETFL);
  if (fl >= 0) fcntl(P.fd, F_SETFL, fl | O_NONBLOCK);
}

/* The port is open on the host side. The session (HELLO, state dump, then
 * the queue) starts when the host says HOST_HELLO, so that every host
 * connection gets exactly one, even one the port did not show us. */
static void on_connect(void) {
  P.connected = 1;
  P.acked = 0;
  P.session = 0;
  P.rlen = 0;
  P.connected_at = ktg_now_ms();
  ktg_symcache_host_arrived();
  ktg_log("host connected; waiting for HOST_HELLO");
}

static void start_session(const char *why) {
  if (P.session) {
    ktg_guard_stop("new session");
    ktg_queue_disconnect();
    ktg_dump_abort();
  }
  P.session = 1;
  P.acked = 0;
  g_ctr.connections++;
  ktg_queue_new_session();
  ktg_symcache_host_arrived();
  ktg_dump_start(P.ever_session ? KTP_STATE_RECONNECT : KTP_STATE_START);
  ktg_guard_session_totals();
  ktg_log("session %llu started (%s)", (unsigned long long)g_ctr.connections, why);
  P.ever_session = 1;
  P.ever_connected = 1;
}

static void on_disconnect(const char *why) {
  if (P.connected) ktg_log("host disconnected (%s); %zu bytes of events queued", why, ktg_queue_live_bytes());
  P.connected = 0;
  P.session = 0;
  P.rlen = 0;
  ktg_guard_stop("host gone");
  ktg_queue_disconnect();
  ktg_dump_abort();
  if (g_opt.fixed_fd >= 0) {
    ktg_log("peer of --fd closed; exiting");
    exit(0);
  }
}

/* Closes the port and opens it again later: after a host ERROR, so that the
 * next session starts clean, and after an unexpected write error. */
static void close_for(long long ms, const char *why) {
  on_disconnect(why);
  if (P.fd >= 0) close(P.fd);
  P.fd = -1;
  P.reopen_at = ktg_now_ms() + ms;
}

void ktg_port_tick(void) {
  if (P.fd < 0) {
    if (ktg_now_ms() < P.reopen_at) return;
    try_open();
    if (P.fd < 0) return;
  }
  if (P.connected) {
    /* A host that never says HOST_HELLO (an older or simpler reader) still
     * gets a session, a little later. */
    if (!P.session && ktg_now_ms() - P.connected_at > HOST_HELLO_WAIT_MS) start_session("no HOST_HELLO");
    return;
  }
  struct pollfd pfd = {P.fd, POLLOUT, 0};
  if (poll(&pfd, 1, 0) < 0) return;
  if (pfd.revents & POLLNVAL) {
    P.fd = -1;
    return;
  }
  if (!(pfd.revents & (POLLHUP | POLLERR))) on_connect();
}

int ktg_port_poll_fd(short *events) {
  if (P.fd < 0 || !P.connected) return -1;
  *events = (short)(POLLIN | (ktg_queue_pending() ? POLLOUT : 0));
  return P.fd;
}

static void handle_frame(const struct ktp_frame *f) {
  switch (f->type) {
    case KTP_HELLO_ACK: {
      struct ktp_hello_ack ack;
      int st = ktp_parse_hello_ack(f, &ack);
      if (st == KTP_OK) {
        ktg_debug("HELLO_ACK minor %u flags 0x%x", ack.proto_minor, ack.flags);
        P.acked = 1;
        if (ack.flags & KTP_ACK_GUARD_ENABLED) ktg_guard_start();
        else ktg_guard_stop("the host does not answer guard notices");
      } else {
        ktg_log("bad HELLO_ACK: %s", ktp_status_name(st));
      }
      break;
    }
    case KTP_HOST_HELLO: {
      struct ktp_hello_ack hh;
      if (ktp_parse_host_hello(f, &hh) != KTP_OK) break;
      start_session(P.session ? "new host on an open connection" : "HOST_HELLO");
      break;
    }
    case KTP_ERROR: {
      struct ktp_error err;
      int st = ktp_parse_error(f, &err);
      g_ctr.host_errors++;
      if (st == KTP_OK) ktg_log("host ERROR: %.*s", (int)err.message.len, err.message.data);
      else ktg_log("host ERROR (unparsable: %s)", ktp_status_name(st));
      close_for(ERROR_BACKOFF_MS, "host sent ERROR");
      break;
    }
    case KTP_GUARD_ACK: {
      struct ktp_guard_ack ack;
      int st = ktp_parse_guard_ack(f, &ack);
      if (st == KTP_OK) ktg_guard_ack(&ack);
      else ktg_log("bad GUARD_ACK: %s", ktp_status_name(st));
      break;
    }
    default:
      ktg_debug("ignoring host frame type %u", f->type);
  }
}

static void read_host(void) {
  for (;;) {
    if (P.rlen == sizeof P.rbuf) P.rlen = 0; /* cannot happen with valid frames */
    ssize_t n = read(P.fd, P.rbuf + P.rlen, sizeof P.rbuf - P.rlen);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      /* EOF: the host end went away (a fifo or socket in tests, or a race
       * with virtio's POLLHUP). */
      if (n < 0) close_for(ERROR_BACKOFF_MS, strerror(errno));
      else on_disconnect("end of file");
      return;
    }
    P.rlen += (size_t)n;
    size_t off = 0;
    while (off < P.rlen && P.connected) {
      struct ktp_frame f;
      size_t used = 0;
      int st = ktp_decode_frame(P.rbuf + off, P.rlen - off, &f, &used);
      if (st == KTP_NEED_MORE) break;
      if (st == KTP_OK) {
        handle_frame(&f);
        if (P.fd < 0) return;
      } else {
        ktg_debug("bad host bytes: %s", ktp_status_name(st));
        if (st == KTP_ERR_MAGIC) used = 1 + ktp_find_magic(P.rbuf + off + 1, P.rlen - off - 1);
      }
      off += used ? used : 1;
    }
    memmove(P.rbuf, P.rbuf + off, P.rlen - off);
    P.rlen -= off;
  }
}

void ktg_port_event(short revents) {
  if (P.fd < 0 || !P.connected) return;
  if (revents & POLLNVAL) {
    close_for(0, "descriptor invalid");
    return;
  }
  if (revents & POLLIN) read_host();
  if (P.fd < 0 || !P.connected) return;
  if (revents & (POLLHUP | POLLERR)) on_disconnect("hangup");
}

void ktg_port_flush(void) {
  if (P.fd < 0 || !P.connected || !P.session) return;
  if (ktg_queue_flush(P.fd, ktg_dump_complete()) != 0) {
    int err = errno;
    if (err == EPIPE || err == ECONNRESET) on_disconnect(strerror(err));
    else close_for(ERROR_BACKOFF_MS, strerror(err));
  }
}
