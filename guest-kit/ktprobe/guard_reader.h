/* ktprobe guard-reader (guard_reader.c). */
#ifndef KTPROBE_GUARD_READER_H
#define KTPROBE_GUARD_READER_H
int guard_reader(int argc, char **argv);
#endif
