/* ktexec: the guest side of the exec channel (see ktexec_proto.h).
 *
 * Reads requests from the org.kthost.exec virtio-serial port, runs each with
 * /bin/sh -c, and answers with the exit status and the combined output.
 * It runs as a respawned daemon from /init, so it never exits on a bad peer:
 * garbage is skipped until the next request magic, a host that goes away is
 * waited for.
 *
 * usage: ktexec [--port PATH | --fd N]
 *   --port PATH  use this file instead of searching /sys/class/virtio-ports
 *                (a pty or fifo works for tests on the host)
 *   --fd N       use an inherited descriptor; exits when its peer closes it
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "ktexec_proto.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ktexec copies the little-endian wire structs directly"
#endif

#define HEADER_SIZE ((size_t)sizeof(struct ktexec_request))
#define RETRY_MS 50
/* After this many EOFs in a row a fifo is reopened: one whose writer left
 * keeps reporting EOF until it is opened again. A virtio port is never
 * reopened for EOF, which there only means that no host is connected: each
 * open and close sends a control message that the guest kernel busy-waits
 * on, and a reopen that fell inside the next host's trace (~1 s after the
 * last host left) put up to 260 k instructions of kthost's own into it. */
#define EOFS_BEFORE_REOPEN 20

struct channel {
  const char *path; /* NULL: search by port name */
  int fixed_fd;     /* >= 0 with --fd */
  int fd;
  unsigned char buf[HEADER_SIZE + KTEXEC_MAX_COMMAND];
  size_t len;
  int eofs;
  int reopen_on_eof; /* a fifo */
};

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Finds /dev/vportNpM whose sysfs name is KTEXEC_PORT_NAME (no udev here). */
static int find_port(char *out, size_t out_size) {
  DIR *dir = opendir("/sys/class/virtio-ports");
  if (!dir) return -1;
  struct dirent *entry;
  int found = -1;
  while ((entry = readdir(dir)) != NULL) {
    if (entry->d_name[0] == '.') continue;
    char path[512], name[128];
    snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name", entry->d_name);
    FILE *f = fopen(path, "re");
    if (!f) continue;
    size_t n = fread(name, 1, sizeof name - 1, f);
    fclose(f);
    name[n] = '\0';
    name[strcspn(name, "\n")] = '\0';
    if (strcmp(name, KTEXEC_PORT_NAME) == 0) {
      snprintf(out, out_size, "/dev/%s", entry->d_name);
      found = 0;
      break;
    }
  }
  closedir(dir);
  return found;
}

static void channel_close(struct channel *ch) {
  if (ch->fd >= 0 && ch->fixed_fd < 0) close(ch->fd);
  ch->fd = -1;
  ch->len = 0;
  ch->eofs = 0;
}

/* Opens the channel, retrying until it exists (the module may still load). */
static void channel_open(struct channel *ch) {
  if (ch->fixed_fd >= 0) {
    ch->fd = ch->fixed_fd;
    return;
  }
  int warned = 0;
  for (;;) {
    char found[300];
    const char *path = ch->path;
    if (!path && find_port(found, sizeof found) == 0) path = found;
    if (path) {
      ch->fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
      if (ch->fd >= 0) {
        struct stat st;
        ch->reopen_on_eof = fstat(ch->fd, &st) == 0 && S_ISFIFO(st.st_mode);
        /* A pty used for testing must pass bytes through untouched. */
        struct termios tio;
        if (tcgetattr(ch->fd, &tio) == 0) {
          cfmakeraw(&tio);
          tcsetattr(ch->fd, TCSANOW, &tio);
        }
        return;
      }
    }
    if (!warned) {
      fprintf(stderr, "ktexec: waiting for %s\n", ch->path ? ch->path : "port " KTEXEC_PORT_NAME);
      warned = 1;
    }
    sleep_ms(200);
  }
}

/* Appends whatever the peer sent. Returns 0 when bytes arrived, -1 when the
 * caller should start over (peer gone; the channel was reset or reopened). */
static int channel_fill(struct channel *ch) {
  if (ch->len == sizeof ch->buf) return 0;
  struct pollfd pfd = {ch->fd, POLLIN, 0};
  int r = poll(&pfd, 1, -1);
  if (r < 0) return errno == EINTR ? 0 : -1;
  /* virtio ports report POLLHUP while the host end is not connected. */
  if ((pfd.revents & (POLLHUP | POLLERR | POLLNVAL)) && !(pfd.revents & POLLIN)) {
    if (pfd.revents & POLLNVAL) {
      channel_close(ch);
      channel_open(ch);
      return -1;
    }
    ch->len = 0; /* a half request from a departed host is worthless */
    sleep_ms(RETRY_MS);
    return -1;
  }
  ssize_t n = read(ch->fd, ch->buf + ch->len, sizeof ch->buf - ch->len);
  if (n > 0) {
    ch->len += (size_t)n;
    ch->eofs = 0;
    return 0;
  }
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return 0;
  if (n == 0 && ch->fixed_fd >= 0) exit(0);
  ch->len = 0;
  sleep_ms(RETRY_MS);
  if (n < 0 || (ch->reopen_on_eof && ++ch->eofs >= EOFS_BEFORE_REOPEN)) {
    channel_close(ch);
    channel_open(ch);
  }
  return -1;
}

static void consume(struct channel *ch, size_t n) {
  memmove(ch->buf, ch->buf + n, ch->len - n);
  ch->len -= n;
}

/* Drops bytes up to the next possible request magic. */
static void resync(struct channel *ch, size_t skip) {
  static const uint32_t magic = KTEXEC_REQUEST_MAGIC;
  size_t i = skip;
  for (; i < ch->len; ++i) {
    size_t avail = ch->len - i < 4 ? ch->len - i : 4;
    if (memcmp(ch->buf + i, &magic, avail) == 0) break;
  }
  consume(ch, i);
}

static int write_full(int fd, const void *data, size_t len) {
  const unsigned char *p = data;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) {
        if (errno == EAGAIN) sleep_ms(RETRY_MS);
        continue;
      }
      return -1;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

struct output {
  char *data;
  size_t len, cap;
  int truncated;
};

static void output_append(struct output *out, const char *data, size_t len) {
  if (out->len + len > KTEXEC_MAX_OUTPUT) {
    len = KTEXEC_MAX_OUTPUT - out->len;
    out->truncated = 1;
  }
  if (len == 0) return;
  if (out->len + len > out->cap) {
    size_t cap = out->cap ? out->cap : 65536;
    while (cap < out->len + len) cap *= 2;
    if (cap > KTEXEC_MAX_OUTPUT) cap = KTEXEC_MAX_OUTPUT;
    char *grown = realloc(out->data, cap);
    if (!grown) {
      out->truncated = 1;
      return;
    }
    out->data = grown;
    out->cap = cap;
  }
  memcpy(out->data + out->len, data, len);
  out->len += len;
}

static void child_exec(const char *command, int out_fd) {
  setpgid(0, 0);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL);
  int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0) dup2(null_fd, 0);
  dup2(out_fd, 1);
  dup2(out_fd, 2);
  execl("/bin/sh", "sh", "-c", command, (char *)NULL);
  dprintf(2, "ktexec: exec /bin/sh: %s\n", strerror(errno));
  _exit(127);
}

/* Runs one command; fills *status and flags. */
static void run_command(const char *command, uint32_t timeout_ms, struct output *out, int32_t *status,
                        uint32_t *flags) {
  int fds[2];
  *flags = 0;
  if (pipe2(fds, O_CLOEXEC) != 0) {
    *status = -1;
    *flags = KTEXEC_FLAG_NOT_RUN;
    char msg[128];
    int n = snprintf(msg, sizeof msg, "ktexec: pipe: %s\n", strerror(errno));
    output_append(out, msg, (size_t)n);
    return;
  }
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    *status = -1;
    *flags = KTEXEC_FLAG_NOT_RUN;
    char msg[128];
    int n = snprintf(msg, sizeof msg, "ktexec: fork: %s\n", strerror(errno));
    output_append(out, msg, (size_t)n);
    return;
  }
  if (pid == 0) child_exec(command, fds[1]);
  setpgid(pid, pid); /* also here: the child may not have run yet when we kill */
  close(fds[1]);

  long long deadline = timeout_ms ? now_ms() + timeout_ms : -1;
  long long exited_at = -1;
  int wstatus = 0, reaped = 0, killed = 0;
  char chunk[65536];
  for (;;) {
    /* Background jobs may keep the pipe open after sh exits; read what they
     * already wrote, briefly, then stop rather than wait for them. */
    if (!reaped && waitpid(pid, &wstatus, WNOHANG) == pid) {
      reaped = 1;
      exited_at = now_ms();
    }
    long long now = now_ms();
    if (reaped && now - exited_at > RETRY_MS) break;
    if (!killed && deadline >= 0 && now >= deadline) {
      kill(-pid, SIGKILL);
      killed = 1;
    }
    int wait_ms = RETRY_MS;
    if (!killed && deadline >= 0 && deadline - now < wait_ms) wait_ms = (int)(deadline - now);
    struct pollfd pfd = {fds[0], POLLIN, 0};
    int r = poll(&pfd, 1, wait_ms);
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    ssize_t n = read(fds[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break; /* EOF: every writer is gone */
    output_append(out, chunk, (size_t)n);
  }
  close(fds[0]);
  if (!reaped) {
    /* The pipe closed but sh may still run (it closed its output). Honour
     * the deadline here too. */
    for (;;) {
      pid_t w = waitpid(pid, &wstatus, WNOHANG);
      if (w == pid || (w < 0 && errno != EINTR)) break;
      if (!killed && deadline >= 0 && now_ms() >= deadline) {
        kill(-pid, SIGKILL);
        killed = 1;
      }
      sleep_ms(10);
    }
  }
  if (WIFEXITED(wstatus)) *status = WEXITSTATUS(wstatus);
  else if (WIFSIGNALED(wstatus)) *status = 128 + WTERMSIG(wstatus);
  else *status = -1;
  if (killed) *flags |= KTEXEC_FLAG_TIMED_OUT;
  if (out->truncated) *flags |= KTEXEC_FLAG_TRUNCATED;
}

static void respond(struct channel *ch, uint32_t id, int32_t status, uint32_t flags, const struct output *out) {
  struct ktexec_response resp = {KTEXEC_RESPONSE_MAGIC, id, status, flags, (uint32_t)out->len, 0};
  /* While no host is connected this write blocks; the next host then reads a
   * stale response first and skips it by id. */
  if (write_full(ch->fd, &resp, sizeof resp) != 0 || write_full(ch->fd, out->data, out->len) != 0) {
    fprintf(stderr, "ktexec: write response %u: %s\n", id, strerror(errno));
    if (ch->fixed_fd >= 0) exit(1);
    channel_close(ch);
    channel_open(ch);
  }
}

static void serve(struct channel *ch) {
  static char command[KTEXEC_MAX_COMMAND + 1];
  /* The last request run and its answer (see the resend note below). */
  static struct {
    int valid;
    uint32_t id;
    int32_t status;
    uint32_t flags;
    struct output out;
  } last;
  for (;;) {
    resync(ch, 0);
    if (ch->len < HEADER_SIZE) {
      channel_fill(ch);
      continue;
    }
    struct ktexec_request req;
    memcpy(&req, ch->buf, sizeof req);
    if (req.cmd_len > KTEXEC_MAX_COMMAND) {
      /* Answer so the host fails fast, then look for the next magic. */
      struct output out = {0};
      const char msg[] = "ktexec: command longer than KTEXEC_MAX_COMMAND\n";
      output_append(&out, msg, sizeof msg - 1);
      respond(ch, req.id, -1, KTEXEC_FLAG_NOT_RUN, &out);
      free(out.data);
      resync(ch, 4);
      continue;
    }
    if (ch->len < HEADER_SIZE + req.cmd_len) {
      channel_fill(ch);
      continue;
    }
    memcpy(command, ch->buf + HEADER_SIZE, req.cmd_len);
    command[req.cmd_len] = '\0';
    consume(ch, HEADER_SIZE + req.cmd_len);

    /* The host resends a request it got no answer to (after reconnecting:
     * QEMU may have dropped the guest's "host connected" message). A request
     * is never run twice: a repeated id gets the cached answer. */
    if (last.valid && req.id == last.id) {
      respond(ch, req.id, last.status, last.flags, &last.out);
      continue;
    }
    struct output out = {0};
    int32_t status = -1;
    uint32_t flags = 0;
    if (strlen(command) != req.cmd_len) {
      const char msg[] = "ktexec: command contains a NUL byte\n";
      output_append(&out, msg, sizeof msg - 1);
      flags = KTEXEC_FLAG_NOT_RUN;
    } else {
      run_command(command, req.timeout_ms, &out, &status, &flags);
    }
    free(last.out.data);
    last.valid = 1;
    last.id = req.id;
    last.status = status;
    last.flags = flags;
    last.out = out;
    respond(ch, req.id, status, flags, &last.out);
  }
}

int main(int argc, char **argv) {
  static struct channel ch;
  ch.fd = -1;
  ch.fixed_fd = -1;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
      ch.path = argv[++i];
    } else if (strcmp(argv[i], "--fd") == 0 && i + 1 < argc) {
      char *end;
      long fd = strtol(argv[++i], &end, 10);
      if (*end || fd < 0 || fd > 1 << 20) {
        fprintf(stderr, "ktexec: bad --fd %s\n", argv[i]);
        return 2;
      }
      ch.fixed_fd = (int)fd;
    } else {
      fprintf(stderr, "usage: ktexec [--port PATH | --fd N]\n");
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  channel_open(&ch);
  serve(&ch);
  return 0;
}
