"""Words and formats shared by the screen and the reports: phrases, places (file:line, library files), the sanitiser."""
