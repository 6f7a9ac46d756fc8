/*
 * The pod sandbox ("pause") process of the real node: it holds the pod's namespaces, reaps the
 * zombies of processes that get reparented to it, and exits on SIGTERM, SIGINT or SIGHUP.
 * Built statically by hack/control-plane.sh, so its image is this one file and nothing else.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_stop(int signal_number) { stop = signal_number; }

static void on_child(int signal_number) {
  (void)signal_number;
  int saved = errno;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
  errno = saved;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--version") == 0) {
    puts("agent-watchdog pause 1");
    return 0;
  }
  if (getpid() != 1) fprintf(stderr, "pause: warning: not running as pid 1\n");

  struct sigaction stopping = {.sa_handler = on_stop};
  sigemptyset(&stopping.sa_mask);
  struct sigaction reaping = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
  sigemptyset(&reaping.sa_mask);
  if (sigaction(SIGTERM, &stopping, NULL) || sigaction(SIGINT, &stopping, NULL) ||
      sigaction(SIGHUP, &stopping, NULL) || sigaction(SIGCHLD, &reaping, NULL)) {
    perror("pause: sigaction");
    return 1;
  }
  while (!stop) pause();
  fprintf(stderr, "pause: shutting down on signal %d\n", (int)stop);
  return 0;
}
