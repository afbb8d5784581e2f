"""The words of a message: a notification rendered in a channel's dialect and language (titles,
summaries, headlines, hints, times), escaped once per dialect. The texts per language are in
`watchdog/words/`; this stage puts them together."""
