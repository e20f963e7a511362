/* The real node's pod sandbox process: it holds the pod's namespaces, reaps the orphans that
 * land on it as the pod's PID 1, and exits at once on SIGTERM or SIGINT. Built static by the
 * test environment (no registry here to pull the usual pause image from). */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction on_stop = {0}, on_child = {0};
    on_stop.sa_handler = stop;
    on_child.sa_handler = reap;
    on_child.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGTERM, &on_stop, NULL);
    sigaction(SIGINT, &on_stop, NULL);
    sigaction(SIGCHLD, &on_child, NULL);
    for (;;) {
        pause();
    }
}
