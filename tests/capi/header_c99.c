// SPDX-License-Identifier: Apache-2.0
/* sluice.h compiles as strict C99 on its own (this file is built with -std=c99 -pedantic). */
#include <sluice/sluice.h>

/* Something to refer to, so that the translation unit is not empty. */
int sluice_header_c99_check(void);
int sluice_header_c99_check(void) { return (int)sizeof(sluice_error) + (int)sizeof(sluice_transfer_report); }
