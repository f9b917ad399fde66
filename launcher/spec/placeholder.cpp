namespace dtrain { int placeholder_spec = 0; }
