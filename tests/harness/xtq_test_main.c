/* The runner's main: `runner CASE [args...]` or `runner --list`. */
#include "xtq_test.h"

struct xtq_test_case *xtq_test_cases;
const char *xtq_test_current = "?";
int xtq_test_argc;
char **xtq_test_argv;

int main(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--list") == 0) {
        for (struct xtq_test_case *c = xtq_test_cases; c; c = c->next)
            printf("%s\n", c->name);
        return argc < 2 ? 2 : 0;
    }
    xtq_test_argc = argc - 2;
    xtq_test_argv = argv + 2;
    for (struct xtq_test_case *c = xtq_test_cases; c; c = c->next) {
        if (strcmp(c->name, argv[1]) == 0) {
            xtq_test_current = c->name;
            c->fn();
            printf("PASS [%s]\n", c->name);
            return 0;
        }
    }
    fprintf(stderr, "no test case named %s\n", argv[1]);
    return 2;
}
