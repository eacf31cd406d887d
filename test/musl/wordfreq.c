/* test/musl/wordfreq.c — a musl-linked text tool for test/musl/programs.sh: counts
 * the words of its input in a hash table that grows by realloc (keys by strdup,
 * lines by getline), sorts them with qsort and prints the N most frequent with
 * their counts. With a second argument K it forks K children, each counting every
 * K-th line and sending its table back through a pipe (fdopen, fprintf, fscanf), and
 * merges them: fork, stdio buffers and malloc in children that then exit.
 *
 * usage: wordfreq N [K] < text */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct entry {
  char *word;
  long count;
};

static struct entry *table;
static size_t cap, used;

static size_t hash(const char *s) {
  size_t h = 1469598103934665603u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
  return h;
}

static void add(const char *word, long n);

static void grow(void) {
  struct entry *old = table;
  size_t old_cap = cap;
  cap = cap ? cap * 2 : 64;
  table = calloc(cap, sizeof *table);
  if (!table) exit(3);
  used = 0;
  for (size_t i = 0; i < old_cap; i++)
    if (old[i].word) {
      add(old[i].word, old[i].count);
      free(old[i].word);
    }
  free(old);
}

static void add(const char *word, long n) {
  if (2 * (used + 1) > cap) grow();
  size_t i = hash(word) & (cap - 1);
  while (table[i].word && strcmp(table[i].word, word) != 0) i = (i + 1) & (cap - 1);
  if (!table[i].word) {
    table[i].word = strdup(word);
    if (!table[i].word) exit(3);
    used++;
  }
  table[i].count += n;
}

static void count_line(char *line) {
  char *word = NULL;
  size_t len = 0;
  for (char *p = line;; p++) {
    if (isalpha((unsigned char)*p)) {
      word = realloc(word, len + 2);
      if (!word) exit(3);
      word[len++] = (char)tolower((unsigned char)*p);
      word[len] = 0;
    } else {
      if (len) add(word, 1);
      len = 0;
      if (!*p) break;
    }
  }
  free(word);
}

static int by_count(const void *a, const void *b) {
  const struct entry *x = a, *y = b;
  if (x->count != y->count) return x->count < y->count ? 1 : -1;
  return strcmp(x->word, y->word);
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  int top = atoi(argv[1]), kids = argc > 2 ? atoi(argv[2]) : 0;
  char *line = NULL;
  size_t n = 0;
  if (kids <= 0) {
    while (getline(&line, &n, stdin) > 0) count_line(line);
  } else {
    char **lines = NULL;
    size_t nlines = 0;
    ssize_t got;
    while ((got = getline(&line, &n, stdin)) > 0) {
      lines = realloc(lines, (nlines + 1) * sizeof *lines);
      lines[nlines++] = strdup(line);
    }
    FILE **from = malloc((size_t)kids * sizeof *from);
    for (int k = 0; k < kids; k++) {
      int fd[2];
      if (pipe(fd) != 0) return 4;
      pid_t pid = fork();
      if (pid == 0) {
        close(fd[0]);
        for (size_t i = (size_t)k; i < nlines; i += (size_t)kids) count_line(lines[i]);
        FILE *out = fdopen(fd[1], "w");
        for (size_t i = 0; i < cap; i++)
          if (table[i].word) fprintf(out, "%s %ld\n", table[i].word, table[i].count);
        fclose(out);
        exit(0);
      }
      close(fd[1]);
      from[k] = fdopen(fd[0], "r");
    }
    char word[256];
    long c;
    for (int k = 0; k < kids; k++) {
      while (fscanf(from[k], "%255s %ld", word, &c) == 2) add(word, c);
      fclose(from[k]);
    }
    int status, failed = 0;
    while (wait(&status) > 0) failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    if (failed) return 5;
    for (size_t i = 0; i < nlines; i++) free(lines[i]);
    free(lines);
    free(from);
  }
  free(line);
  struct entry *all = malloc(used * sizeof *all);
  size_t k = 0;
  for (size_t i = 0; i < cap; i++)
    if (table[i].word) all[k++] = table[i];
  qsort(all, k, sizeof *all, by_count);
  for (size_t i = 0; i < k && (int)i < top; i++) printf("%7ld %s\n", all[i].count, all[i].word);
  printf("%zu distinct words\n", k);
  for (size_t i = 0; i < cap; i++) free(table[i].word);
  free(table);
  free(all);
  return 0;
}
